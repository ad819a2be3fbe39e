"""attnlens' command-line interface (installed as the module ``attnlens.cli``)."""
