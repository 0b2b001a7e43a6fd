"""Shared test helpers: ``builders`` (stage records with files, runs in a store, fingerprints, paired results,
XCom bundles), ``fakes`` (NVML, a webhook sink), ``fake_runner`` (the runner protocol without TensorFlow),
``models`` (tiny real Keras models), ``xplanes`` (real profiles from a TF session), ``airflow`` (a fake Airflow
API server, the DAG environment). ``ROOT`` is the checkout."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
