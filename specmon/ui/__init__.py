"""specmon.ui"""
