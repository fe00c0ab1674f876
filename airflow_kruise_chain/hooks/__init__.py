"""Hooks of the airflow-kruise-chain provider."""
