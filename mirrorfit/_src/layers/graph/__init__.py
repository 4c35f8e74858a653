"""The model graph of `mirrorfit.layers`: symbolic tensors and the calls recorded on them
(`symbolic`), the functional and Sequential modules that run the graph (`functional`,
`sequential`, `input_layer`), Keras' masks flowing from layer to layer (`mask_flow`), and
what is asked of a layers model: its layers and frozen params (`model_info`), its config as
JSON (`config`), its summary rows (`summary`) and `plot_model`'s picture
(`model_visualization`).
"""
