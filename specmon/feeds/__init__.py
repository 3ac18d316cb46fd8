"""Feeds: the live data paths (demo, connect) that push into a `specmon.feed.FeedSink`."""
