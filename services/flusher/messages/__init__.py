"""Message streams → MySQL: the inbox's batch apply, and the committed changes on the accounts'
live feeds."""
