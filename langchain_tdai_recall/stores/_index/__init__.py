"""The derived, in-memory indexes of one scope and layer, shared by every backend.

`layer.LayerIndex` holds a scope's keyword postings (`keyword`), its vectors (`vectors`), the few
row fields ranking needs and its rows in profile order (`profile`); `snapshot` persists a large
index between processes and `trim` hands the memory a large build freed back to the OS. They are
rebuilt from a backend's rows (`stores.records`) and never hold data a backend does not have.
"""
