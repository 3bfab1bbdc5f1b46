"""One ``local[2]`` SparkSession for every pipeline test (session start costs 8-12 s)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def spark():
    pytest.importorskip("pyspark")
    from pipeline.spark import spark_session

    session = spark_session("local[2]", app_name="remote-leader-tests")
    yield session
    session.stop()
