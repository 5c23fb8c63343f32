"""sharp_dagster.demo"""
