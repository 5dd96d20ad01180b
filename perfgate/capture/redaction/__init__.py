"""Secrets kept out of what perfgate keeps: text, SQLite exports and .nsys-rep files."""
