"""How low-rank attention is: singular-value spectra of every head (the spectral kernel),
and what a rank-k attention would cost."""
