"""One module per family of benchmark file formats; :mod:`glmrag.data.importers` is the public entry."""
