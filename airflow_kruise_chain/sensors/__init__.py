"""Sensors of the airflow-kruise-chain provider."""
