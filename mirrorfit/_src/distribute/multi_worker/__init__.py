"""`MultiWorkerMirroredStrategy`: the cluster configuration, the roll call before JAX starts,
failing fast when one worker raises, and quiet worker output.
"""
