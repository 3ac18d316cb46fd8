"""specmon.parse"""
