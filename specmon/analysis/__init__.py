"""specmon.analysis"""
