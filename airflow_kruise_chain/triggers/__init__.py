"""Triggers of the airflow-kruise-chain provider."""
