"""sharp_dagster.sensors"""
