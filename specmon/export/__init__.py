"""specmon.export"""
