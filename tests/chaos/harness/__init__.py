"""The fault-injection harness: a private stack per scenario (stack.py: its service processes in
service.py, its stream shards and what they hold in shards.py, the developer's local stack it
leans on in local_stack.py), datastore proxies that can blackhole (proxy.py), the load and its
ledger (load.py), the faults (faults/, by kind, mode_switch.py, noisy_account.py) and the
accounting of a run (run.py). The tests beside this folder run it."""
