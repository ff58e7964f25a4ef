"""The commands of ``amaris``, one module per command group: each declares its parsers
with argparse only and names the handler of each command (:func:`amaris.cli.common.command`).
"""
