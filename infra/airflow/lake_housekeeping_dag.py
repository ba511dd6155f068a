"""Airflow DAG: every day, ingest the S3 Inventory, dry-run the batch vacuum, then vacuum and purge.

Deploy: copy this file and the repository's ``infra/`` folder into the DAGs folder, and
the settings (see ``infra/daily.example.yaml``) to ``lake_housekeeping.yaml`` beside this
file or to the path in ``LAKE_HOUSEKEEPING_SETTINGS``. Workers need ``spark-submit``
(or set ``spark_submit`` to your wrapper, e.g. an EMR or Kubernetes submitter).
Airflow 2.4 or newer (``schedule=``).
"""

from __future__ import annotations

import os
import shlex
from datetime import datetime, timedelta
from pathlib import Path

from airflow import DAG
from airflow.operators.bash import BashOperator

from infra.daily import daily_steps, load_settings

SETTINGS = os.environ.get("LAKE_HOUSEKEEPING_SETTINGS", str(Path(__file__).with_name("lake_housekeeping.yaml")))

with DAG(
    dag_id="lake_housekeeping",
    description="S3 Inventory -> inventory Delta table -> batch vacuum (dry run first)",
    schedule="0 6 * * *",  # S3 delivers each day's inventory during the night (UTC)
    start_date=datetime(2026, 1, 1),
    catchup=False,  # only today's inventory matters; never replay old days
    max_active_runs=1,  # two vacuums of one lake must not overlap
    default_args={"retries": 1, "retry_delay": timedelta(minutes=30)},
    tags=["lake-housekeeping"],
) as dag:
    previous = None
    for step in daily_steps(load_settings(SETTINGS), "{{ ds }}"):
        command = shlex.join(step.argv)
        if step.refusals_are_reported:
            command += " || [ $? -eq 1 ]"  # 1: some table refused, named in the report; others went through
        task = BashOperator(task_id=step.name, bash_command=command)
        if previous is not None:
            previous >> task
        previous = task
