"""Level 7: the facade: `Model`, `Sequential`, functional models, ``model(x)``, weights,
saving and `load_model`.
"""
