"""Spectra of each head's factored QK and OV circuits, and the query/key subspaces heads share."""
