"""Every loss family, one folder each (``<family>/params.py`` torch-free rules, ``<family>/loss.py`` the torch module), their base classes and the registry that finds them."""
