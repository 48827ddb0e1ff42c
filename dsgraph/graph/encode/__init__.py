"""``dsgraph encode``: node encodings computed once and stored beside the features.

``rwse.py`` (random-walk return probabilities, exact or estimated), ``lappe.py`` (Laplacian
eigenvectors per connected component), ``adjacency.py`` (the graph they read), ``source.py`` and
``write.py`` (the .npz or partition store read and written), ``cli.py`` (the command).
"""
