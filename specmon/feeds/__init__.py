"""Feeds: the live data paths (a real host, the demo's simulated host, a replay) that call a
`specmon.session.events.FeedSink` (the session model, or the TUI's sink)."""
