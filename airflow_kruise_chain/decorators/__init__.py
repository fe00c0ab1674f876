"""TaskFlow stages: `@task.kruise_chain` and `@chain.task`."""
