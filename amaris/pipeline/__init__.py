"""The step path: what the Prefect step flow needs at run time, and how the API starts it."""
