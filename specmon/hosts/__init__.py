"""specmon.hosts"""
