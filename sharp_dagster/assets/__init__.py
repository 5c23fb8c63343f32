"""sharp_dagster.assets"""
