"""sharp_dagster.cdc"""
