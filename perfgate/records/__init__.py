"""The typed records every stage passes on, their record version, and the names they may hold."""
