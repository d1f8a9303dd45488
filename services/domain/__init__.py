"""Domain rules more than one service applies: ids and the bounds of times and text, the access
table and the request field rules, the inbox's enums and columns, the forum's rows and enrolment
rule, keyset pages, the live watches' contract, and the schema a build expects."""
