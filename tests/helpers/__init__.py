"""Shared test helpers: ``builders`` (stage records with files), ``models`` (tiny real Keras models),
``xplanes`` (real profiles from a TF session), ``fake_runner`` (the runner protocol without TensorFlow),
``airflow`` (a fake Airflow API server). ``ROOT`` is the checkout."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
