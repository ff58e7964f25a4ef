"""The pipeline's memory: rollout log, step registry, digest memory and embedders.

Import what you use from its modules (:mod:`amaris.memory.records`,
:mod:`amaris.memory.store`...): the package loads none of them, so a process that needs the
rollout records alone (the offline judge) does not load Qdrant's client.
"""
