"""specmon.sources"""
