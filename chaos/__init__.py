"""``make chaos``: fault scenarios against real API and worker processes (the reliability review).

:mod:`chaos.cluster` starts and stops the processes, :mod:`chaos.scenarios` holds the
scenarios and their pass criteria, :mod:`chaos.run` prints the table.
"""
