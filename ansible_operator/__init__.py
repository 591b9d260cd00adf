"""ansible-operator: run Ansible roles as Kubernetes operators.

Data flow of one custom-resource event, one module per stage:

    watches  ->  intake  ->  queue  ->  reconcile  ->  (extravars, executors)  ->  results  ->  status
"""

__version__ = "0.1.0"
