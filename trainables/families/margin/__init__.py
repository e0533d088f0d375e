"""The `margin` loss family: its torch-free ``params`` (Params and spec rules) and its ``loss`` (the torch module)."""
