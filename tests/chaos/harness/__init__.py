"""The fault-injection harness: a private stack per scenario (stack.py), datastore proxies that
can blackhole (proxy.py), the load and its ledger (load.py), the faults (faults.py, mode_switch.py,
noisy_account.py) and the accounting of a run (run.py). The tests beside this folder run it."""
