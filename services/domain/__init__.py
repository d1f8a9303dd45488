"""Domain rules more than one service applies: ids, the inbox's enums and columns, the forum."""
