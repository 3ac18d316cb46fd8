"""specmon.session"""
