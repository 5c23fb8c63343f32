"""The Dagster UI in a real browser (Chromium via Playwright) against `dagster dev`."""
