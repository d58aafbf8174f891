"""What the store's Ray jobs run in their actors, kept out of `probembed.store`.

An actor imports the module of each class it runs (`encoding.Embedder`, and the job's
`progress.EncodedCount`, whose handle the encoding actors hold): from the store, that meant
the store's package and with it LanceDB, some 1.5 s of every actor's start for a library no
actor uses. These modules import only numpy, pyarrow and the pipeline.
"""
