"""sink"""
