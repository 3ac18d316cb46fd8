"""specmon.control"""
