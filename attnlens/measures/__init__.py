"""One folder per measure: its analyzers, tables, report section and command options."""
