"""dpsql's own local Spark session, started quietly: the JVM logs only errors and the one line the
JVM prints for Spark's incubator module is dropped, so `dpsql --engine spark` prints its answer alone."""

from __future__ import annotations

import os
import sys
import threading
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import InputError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

_LOG_CONFIG = Path(__file__).with_name("spark_log4j2.properties")
_SETTINGS = {"spark.sql.shuffle.partitions": "1", "spark.ui.enabled": "false",
             "spark.ui.showConsoleProgress": "false", "spark.driver.bindAddress": "127.0.0.1",
             "spark.driver.host": "127.0.0.1", "spark.sql.ansi.enabled": "false",
             "spark.driver.extraJavaOptions": f'"-Dlog4j2.configurationFile={_LOG_CONFIG.as_uri()}"'}
# Printed by the JVM itself (not a log) for the --add-modules=jdk.incubator.vector Spark 4 passes.
_JVM_NOTICE = "WARNING: Using incubator modules: jdk.incubator.vector"


def local_session(memory: str = "1g") -> SparkSession:
    """A local Spark session with small settings (2 cores, one shuffle partition, no UI, the
    driver on 127.0.0.1, errors only in the JVM's log): for `dpsql --engine spark` and the
    tests, not a cluster. A session already running in this process is reused as it is."""
    try:
        from pyspark import SparkConf, SparkContext
        from pyspark.java_gateway import launch_gateway
        from pyspark.sql import SparkSession
    except ImportError:
        raise InputError("the Spark engine needs pyspark: pip install 'dpsql[spark]'") from None
    conf = SparkConf().setMaster("local[2]").setAppName("dpsql").set("spark.driver.memory", memory)
    conf.setAll(list(_SETTINGS.items()))
    with quiet_pandas_warning():
        if SparkContext._gateway is None:  # no JVM yet: start it with its standard error filtered
            read, write = os.pipe()
            threading.Thread(target=_forward, args=(read,), name="dpsql-jvm-stderr", daemon=True).start()
            try:
                gateway = launch_gateway(conf, popen_kwargs={"stderr": write})
            finally:
                os.close(write)  # the JVM holds its own copy
            SparkContext(conf=conf, gateway=gateway)
        return SparkSession.builder.config(conf=conf).getOrCreate()


@contextmanager
def quiet_pandas_warning() -> Iterator[None]:
    """Hide PySpark's FutureWarning about the pandas version while dpsql itself calls PySpark (it
    is about PySpark's pandas conversions, which dpsql does not use); other warnings still show."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="PySpark does not yet fully support pandas",
                                category=FutureWarning)
        yield


def _forward(read: int) -> None:
    """Copy the JVM's standard error to ours, all but the JVM's incubator-module notice."""
    with open(read, encoding="utf-8", errors="replace") as stream:
        for line in stream:
            if line.rstrip("\n") != _JVM_NOTICE:
                sys.stderr.write(line)
                sys.stderr.flush()
