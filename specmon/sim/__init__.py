"""specmon.sim"""
