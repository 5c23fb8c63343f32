"""OpenLineage run events of log-driven partition runs (START, COMPLETE, FAIL), built and sent with the
`openlineage-python` client.

This module owns the events: `emit_run_event` is called by `logdriven.PartitionRun` when a period is claimed
(START) and when it ends (COMPLETE or FAIL with the error). Each event names the job (`<layer>/<table>` in the
namespace `OPENLINEAGE_NAMESPACE`, default `sharp_dagster`), a run id (UUIDv7, one per claimed attempt) and
facets: nominal time (the period), processing engine, job type, the SQL (SQL assets), the input datasets with
their schemas, and the output dataset with its schema (names from the parser at START, the written Spark schema
at COMPLETE) and its column lineage: each output column -> its source columns, each with the parser's
transformation (DIRECT with subtype IDENTITY, TRANSFORMATION or AGGREGATION; INDIRECT CONDITIONAL for a column read
only in a CASE / IF condition of the value), and the columns that steer the rows as the dataset-level list (INDIRECT
with subtype FILTER, JOIN, GROUP_BY, SORT or WINDOW, one entry per subtype).

Where lineage comes from: the caller hands it over (`JobLineage`); the project's lineage of every job is built by
the project wing (`warehouse/catalog_lineage.py`: SQL tables parsed, the CDC path from the catalog's edges).

Where events go: when the client's own configuration is present in the environment (`OPENLINEAGE_URL` with
optional `OPENLINEAGE_API_KEY` / `OPENLINEAGE_ENDPOINT`, `OPENLINEAGE__TRANSPORT__*`, `OPENLINEAGE_CONFIG`,
`OPENLINEAGE_DISABLED`), the client resolves the transport itself (HTTP to Marquez, DataHub, OpenMetadata, ...);
otherwise one JSON event per line is appended to `<SHARP_DATA_DIR>/openlineage/events.jsonl`. Sending never fails
a run: an error is logged by type and transport kind only (never the URL or key).

Datasets: warehouse tables (`db.table`) live in the namespace `file://<warehouse dir>`; a table named
`platform:db.table` (e.g. the MySQL sources) in the namespace `<platform>`; a path dataset (files read as
`parquet.`/x``, a directory written by INSERT OVERWRITE DIRECTORY) in the namespace of its location's scheme
(`file` for a bare path), named by its path, as OpenLineage names files.

No Dagster import.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import lru_cache
from importlib.metadata import version
from pathlib import Path
from typing import Any

from openlineage.client import OpenLineageClient
from openlineage.client.event_v2 import InputDataset, Job, OutputDataset, Run, RunEvent, RunState
from openlineage.client.facet_v2 import (
    column_lineage_dataset,
    error_message_run,
    job_type_job,
    nominal_time_run,
    processing_engine_run,
    schema_dataset,
    sql_job,
)
from openlineage.client.transport.file import FileConfig, FileTransport
from openlineage.client.uuid import generate_new_uuid

from sharp_dagster.lineage.parser import ScriptLineage
from sharp_dagster.settings import Settings, openlineage_environment

__all__ = [
    "EVENTS_FILE",
    "JobLineage",
    "build_run_event",
    "emit_run_event",
    "events_path",
    "schema_fields",
]

log = logging.getLogger("sharp_dagster.lineage.openlineage")

# An event names its producer by a URI; the project has no public URL of its own, so a URN with its version.
PRODUCER = "urn:sharp_dagster:lineage"
EVENTS_FILE = Path("openlineage") / "events.jsonl"
_CLIENT_ENV = ("OPENLINEAGE_URL", "OPENLINEAGE_CONFIG", "OPENLINEAGE_DISABLED")
_STATES = {"START": RunState.START, "COMPLETE": RunState.COMPLETE, "FAIL": RunState.FAIL}


@dataclass
class JobLineage:
    """What one job reads and writes: `target` (`db.table`), the tables read, each output column's source columns
    (`db.table.column`), the row-steering columns, the known schemas of the inputs, and the SQL if any."""

    target: str
    inputs: list[str]
    columns: dict[str, list[str]] = field(default_factory=dict)
    dependencies: list[str] = field(default_factory=list)
    input_schemas: dict[str, list[str]] = field(default_factory=dict)
    sql: str | None = None
    # column -> source -> OpenLineage subtypes (IDENTITY, ..., CONDITIONAL); dependency -> subtypes (FILTER, ...).
    # Missing entries are sent as DIRECT TRANSFORMATION / INDIRECT FILTER.
    transformations: dict[str, dict[str, list[str]]] = field(default_factory=dict)
    dependency_kinds: dict[str, list[str]] = field(default_factory=dict)
    paths: dict[str, str] = field(default_factory=dict)  # path datasets among the names: name -> location

    @classmethod
    def from_script(
        cls,
        lineage: ScriptLineage,
        target: str,
        schemas: Mapping[str, Mapping[str, str]] | None = None,
        sql: str | None = None,
    ) -> JobLineage:
        prefix = target + "."
        inputs = [s for s in lineage.target_sources.get(target, lineage.sources) if s != target]
        columns = {
            c.target[len(prefix) :]: [s for s in c.sources if not s.endswith(".*")]
            for c in lineage.columns
            if c.target.startswith(prefix) and not c.target.endswith(".*")
        }
        transformations = {
            c.target[len(prefix) :]: {s: k for s, k in c.transformations.items() if not s.endswith(".*")}
            for c in lineage.columns
            if c.target.startswith(prefix) and not c.target.endswith(".*")
        }
        refs = lineage.target_dependency_refs.get(target)
        dependency_kinds = (
            {f"{k}.{n}": kinds for k, n, kinds in refs}
            if refs is not None
            else dict(lineage.dependency_kinds)
        )
        schemas = schemas or {}
        return cls(
            target=target,
            inputs=sorted(inputs),
            columns=columns,
            dependencies=sorted(lineage.target_dependencies.get(target, lineage.dataset_dependencies)),
            input_schemas={t: list(schemas[t]) for t in inputs if t in schemas},
            sql=sql,
            transformations=transformations,
            dependency_kinds=dependency_kinds,
            paths=dict(lineage.paths),
        )


def schema_fields(df: Any) -> list[tuple[str, str]]:
    """(name, Spark type) of a DataFrame's columns, for the output schema facet."""
    return [(f.name, f.dataType.simpleString()) for f in df.schema.fields]


# ------------------------------------------------------------------------------------------------------------ events
def _dataset(qualified: str, warehouse_uri: str, paths: Mapping[str, str] | None = None) -> tuple[str, str]:
    """(namespace, name) of a table as the catalog names it, or of a path dataset (namespace: its scheme)."""
    location = paths.get(qualified) if paths else None
    if location is not None:
        scheme, sep, rest = location.partition("://")
        if sep:
            authority, _, path = rest.partition("/")
            return f"{scheme}://{authority}", "/" + path
        return "file", location[len("file:") :] if location.startswith("file:") else location
    platform, sep, rest = qualified.rpartition(":")
    return (platform, rest) if sep else (warehouse_uri, qualified)


def _split_ref(ref: str, tables: Sequence[str]) -> tuple[str, str]:
    """`table.column` -> (table, column), the table being the longest known one it starts with (a path or a
    column name may hold dots)."""
    for table in sorted(tables, key=len, reverse=True):
        if ref.startswith(table + "."):
            return table, ref[len(table) + 1 :]
    table, _, column = ref.rpartition(".")
    return table, column


def _schema(fields: Sequence[tuple[str, str | None]]) -> schema_dataset.SchemaDatasetFacet:
    return schema_dataset.SchemaDatasetFacet(
        fields=[schema_dataset.SchemaDatasetFacetFields(name=n, type=t or None) for n, t in fields]
    )


# OpenLineage's transformation type of each subtype the parser gives.
_INDIRECT = {"CONDITIONAL", "FILTER", "JOIN", "GROUP_BY", "SORT", "WINDOW"}


def _input_field(
    ref: str, lineage: JobLineage, warehouse_uri: str, subtypes: Sequence[str]
) -> column_lineage_dataset.InputField:
    table, column = _split_ref(ref, [*lineage.inputs, *lineage.paths])
    namespace, name = _dataset(table, warehouse_uri, lineage.paths)
    return column_lineage_dataset.InputField(
        namespace=namespace,
        name=name,
        field=column,
        transformations=[
            column_lineage_dataset.Transformation(
                type="INDIRECT" if subtype in _INDIRECT else "DIRECT", subtype=subtype
            )
            for subtype in subtypes
        ],
    )


def _column_lineage(
    lineage: JobLineage, warehouse_uri: str
) -> column_lineage_dataset.ColumnLineageDatasetFacet:
    fields = {}
    for col, sources in lineage.columns.items():
        kinds = lineage.transformations.get(col, {})
        fields[col] = column_lineage_dataset.Fields(
            inputFields=[
                _input_field(s, lineage, warehouse_uri, kinds.get(s) or ["TRANSFORMATION"]) for s in sources
            ]
        )
    dataset = [
        _input_field(d, lineage, warehouse_uri, lineage.dependency_kinds.get(d) or ["FILTER"])
        for d in lineage.dependencies
    ]
    return column_lineage_dataset.ColumnLineageDatasetFacet(fields=fields, dataset=dataset)


def build_run_event(
    event_type: str,
    *,
    job_name: str,
    run_id: str,
    namespace: str,
    warehouse_uri: str,
    lineage: JobLineage | None,
    nominal_start: datetime | None = None,
    nominal_end: datetime | None = None,
    output_fields: Sequence[tuple[str, str]] | None = None,
    error: str | None = None,
    event_time: datetime | None = None,
    spark_version: str | None = None,
) -> RunEvent:
    """One OpenLineage run event; `event_type` is START, COMPLETE or FAIL."""
    if event_type not in _STATES:
        raise ValueError(f"OpenLineage event type must be one of {sorted(_STATES)}, got {event_type!r}")
    run_facets: dict[str, Any] = {}
    if nominal_start is not None:
        run_facets["nominalTime"] = nominal_time_run.NominalTimeRunFacet(
            nominalStartTime=_iso(nominal_start), nominalEndTime=_iso(nominal_end) if nominal_end else None
        )
    if spark_version:
        run_facets["processing_engine"] = processing_engine_run.ProcessingEngineRunFacet(
            version=spark_version, name="spark", openlineageAdapterVersion=_client_version()
        )
    if error is not None:
        run_facets["errorMessage"] = error_message_run.ErrorMessageRunFacet(
            message=error[:4000], programmingLanguage="python"
        )
    job_facets: dict[str, Any] = {
        "jobType": job_type_job.JobTypeJobFacet(
            processingType="BATCH", integration="DAGSTER", jobType="ASSET"
        )
    }
    inputs: list[InputDataset] = []
    outputs: list[OutputDataset] = []
    if lineage is not None:
        if lineage.sql:
            job_facets["sql"] = sql_job.SQLJobFacet(query=lineage.sql, dialect="spark")
        for table in lineage.inputs:
            namespace_in, name_in = _dataset(table, warehouse_uri, lineage.paths)
            cols = lineage.input_schemas.get(table)
            inputs.append(
                InputDataset(
                    namespace=namespace_in,
                    name=name_in,
                    facets={"schema": _schema([(c, None) for c in cols])} if cols else None,
                )
            )
        out_facets: dict[str, Any] = {}
        fields = list(output_fields) if output_fields else [(c, None) for c in lineage.columns]
        if fields:
            out_facets["schema"] = _schema(fields)
        if lineage.columns or lineage.dependencies:
            out_facets["columnLineage"] = _column_lineage(lineage, warehouse_uri)
        namespace_out, name_out = _dataset(lineage.target, warehouse_uri, lineage.paths)
        outputs.append(OutputDataset(namespace=namespace_out, name=name_out, facets=out_facets or None))
    return RunEvent(
        eventType=_STATES[event_type],
        eventTime=_iso(event_time or datetime.now(UTC)),
        run=Run(runId=run_id, facets=run_facets),
        job=Job(namespace=namespace, name=job_name, facets=job_facets),
        inputs=inputs,
        outputs=outputs,
        producer=PRODUCER,
    )


def _iso(moment: datetime) -> str:
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.isoformat()


@lru_cache(maxsize=1)
def _client_version() -> str:

    return version("openlineage-python")


# ------------------------------------------------------------------------------------------------------------ sending
def events_path() -> Path:
    return Settings.from_env().data_dir / EVENTS_FILE


def _client_configured() -> bool:
    env = openlineage_environment()
    return any(env.get(k) for k in _CLIENT_ENV) or any(
        k.startswith(OpenLineageClient.DYNAMIC_ENV_VARS_PREFIX) for k in env
    )


_CLIENTS: dict[str, OpenLineageClient] = {}


def _client() -> OpenLineageClient:
    """The client for the current environment: the client's own configuration, else the events file."""
    if _client_configured():
        # Keyed by the configuration it was built from, except the variables the client itself derives from
        # OPENLINEAGE_URL (it writes them into the environment when it is built).
        alias = (
            f"{OpenLineageClient.DYNAMIC_ENV_VARS_PREFIX}TRANSPORT__TRANSPORTS__"
            f"{OpenLineageClient.DEFAULT_URL_TRANSPORT_NAME.upper()}"
        )
        key = "env:" + repr(
            sorted((k, v) for k, v in openlineage_environment().items() if not k.startswith(alias))
        )
        if key not in _CLIENTS:
            _CLIENTS[key] = OpenLineageClient()
        return _CLIENTS[key]
    path = events_path()
    key = f"file:{path}"
    if key not in _CLIENTS:
        path.parent.mkdir(parents=True, exist_ok=True)
        _CLIENTS[key] = OpenLineageClient(
            transport=FileTransport(FileConfig(log_file_path=str(path), append=True))
        )
    return _CLIENTS[key]


def new_run_id() -> str:
    return str(generate_new_uuid())


def emit_run_event(
    event_type: str,
    *,
    job_name: str,
    run_id: str,
    nominal_start: datetime | None = None,
    nominal_end: datetime | None = None,
    output_fields: Sequence[tuple[str, str]] | None = None,
    error: str | None = None,
    lineage: JobLineage | None = None,
) -> RunEvent | None:
    """Build and send one run event of `job_name` (with `lineage`, its inputs, output and column lineage, when
    known); returns it, or None when it could not be built or sent."""
    try:
        settings = Settings.from_env()
        event = build_run_event(
            event_type,
            job_name=job_name,
            run_id=run_id,
            namespace=openlineage_environment().get("OPENLINEAGE_NAMESPACE", "sharp_dagster"),
            warehouse_uri=_warehouse_uri(str(settings.warehouse_dir)),
            lineage=lineage,
            nominal_start=nominal_start,
            nominal_end=nominal_end,
            output_fields=output_fields,
            error=error,
            spark_version=_spark_version(),
        )
        client = _client()
        client.emit(event)
        return event
    except Exception as exc:  # lineage must never fail the run; the message may hold a URL, so only the type
        log.warning("OpenLineage %s event of %s not sent: %s", event_type, job_name, type(exc).__name__)
        return None


@lru_cache(maxsize=1)
def _spark_version() -> str | None:
    try:
        import pyspark  # optional here: the lineage commands run without Spark installed or loaded

        return str(pyspark.__version__)
    except ImportError:
        return None


def _warehouse_uri(path: str) -> str:
    return path if "://" in path else f"file://{path}"
