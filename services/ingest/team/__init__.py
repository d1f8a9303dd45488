"""The team inside a Zalo account: its agents and their roles, who handles which conversation
and in what status, its canned replies, and the audit of every change to them."""
