"""The lineage explorer: a small web app over the project's lineage graph (`sharp-dagster lineage serve`).

- `links`: the explorer's default address and the URL of a table's page (also used by the Dagster metadata);
- `api`: the JSON answers (the lineage graph's JSON of vertices and edges, a table's columns, a column's path
  and impact, governance);
- `server`: the stdlib ThreadingHTTPServer serving the API, the page and the browser libraries under `static/`.

The page draws with Apache ECharts (tree, Sankey), installed under `static/node_modules` by `npm ci` from the
pinned `static/package.json` / `package-lock.json` and served by our own server: the page loads nothing from
elsewhere. No Dagster import anywhere in this package.
"""
