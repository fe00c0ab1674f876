"""Operators of the airflow-kruise-chain provider."""
