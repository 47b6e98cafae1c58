"""Grain's worker processes, epochs and per-process shards: what changes the batches.

Which batches stay those of reading in the training process when Grain reads with worker
processes (batching inside the `MapDataset`, before `mp_prefetch`) and which do not
(batching after `to_iter_dataset`, or in `grain.DataLoader`, where each worker batches its
own records); what a saved position records, and what restoring it with another worker
count gives; what an epoch loop without `.repeat()` reads; and how `grain.DataLoader`
shards by process, before shuffling. Workers are started with `spawn` and import this file
again: everything that runs is under `if __name__ == "__main__":`.
"""

import jax

jax.config.update("jax_num_cpu_devices", 8)

# %% pipelines
# --8<-- [start:pipelines]
import grain
from absl import flags

EXAMPLES, BATCH, WORKERS = 48, 4, 2
read = grain.ReadOptions(num_threads=0)  # the data is in memory
shuffled = grain.MapDataset.range(EXAMPLES).shuffle(seed=0)


def load_example(index):
    return {"index": index}


def batched_first(workers):
    """Batches made in the MapDataset, then read by `workers` processes (0: this one)."""
    dataset = shuffled.map(load_example).batch(BATCH).to_iter_dataset(read)
    options = grain.MultiprocessingOptions(num_workers=workers)
    return iter(dataset.mp_prefetch(options) if workers else dataset)


def batched_last(workers):
    """The same examples, batched after to_iter_dataset, inside each worker."""
    dataset = shuffled.map(load_example).to_iter_dataset(read).batch(BATCH)
    options = grain.MultiprocessingOptions(num_workers=workers)
    return iter(dataset.mp_prefetch(options) if workers else dataset)


def data_loader(workers):
    """grain.DataLoader: a sampler of shuffled indices, batched in each worker."""
    sampler = grain.samplers.IndexSampler(EXAMPLES, shuffle=True, seed=0, num_epochs=1)
    return iter(
        grain.DataLoader(
            data_source=[load_example(i) for i in range(EXAMPLES)],
            sampler=sampler,
            operations=[grain.transforms.Batch(BATCH)],
            worker_count=workers,
            read_options=read,
        )
    )


def first_batches(iterator, count=3):
    """The indices of the next `count` batches, as lists."""
    return [next(iterator)["index"].tolist() for _ in range(count)]


if __name__ == "__main__":
    flags.FLAGS.mark_as_parsed()  # or the workers raise UnparsedFlagAccessError
# --8<-- [end:pipelines]

# %% order
# --8<-- [start:order]
if __name__ == "__main__":
    reading = batched_first(WORKERS)  # read on in the next cell, for its position
    for make in (batched_first, batched_last, data_loader):
        alone, workers = make(0), reading if make is batched_first else make(WORKERS)
        one, two = first_batches(alone), first_batches(workers)
        print(f"{make.__name__}, {WORKERS} workers: the batches of 0 workers: {one == two}")
        print(f"  0 workers: {one}")
        print(f"  {WORKERS} workers: {two}")
        del alone, workers  # closes them, and stops the workers, now rather than at exit
# --8<-- [end:order]

# %% position
# --8<-- [start:position]
if __name__ == "__main__":
    position = reading.get_state()  # after 3 batches, as a checkpoint would save it
    expected = first_batches(reading, 1)
    del reading
    states = position["iterators_in_use_states"]  # each worker's own position
    print(f"a position saved with {WORKERS} workers holds {len(states)} worker positions")
    for workers in (WORKERS, WORKERS + 1, 0):
        restored = batched_first(workers)
        try:
            restored.set_state(position)
            same = first_batches(restored, 1) == expected
            print(f"restored with {workers} workers: the next batch is the expected one: {same}")
        except Exception as error:  # KeyError, IndexError: what Grain 0.2.18 raises
            print(f"restored with {workers} workers: {type(error).__name__}: {error}")
        del restored
    threads = iter(shuffled.map(load_example).batch(BATCH).to_iter_dataset())  # 16 threads
    first_batches(threads, 3)
    position, expected = threads.get_state(), first_batches(threads, 1)
    alone = batched_first(0)  # no threads, no workers
    alone.set_state(position)
    print(f"a position saved with 16 threads: {position}")
    print(
        f"restored with none: the next batch is the expected one: {first_batches(alone, 1) == expected}"
    )
    del threads, alone
# --8<-- [end:position]

# %% epochs
# --8<-- [start:epochs]
if __name__ == "__main__":
    eight = grain.MapDataset.range(8)
    once = eight.shuffle(seed=0)
    print("a loop over epochs, without .repeat():")
    for epoch in range(3):
        print(f"  epoch {epoch}: {list(once.to_iter_dataset(read))}")
    stream = list(eight.shuffle(seed=0).repeat(3).to_iter_dataset(read))
    print("shuffle, then .repeat(3), one iterator:")
    for epoch in range(3):
        print(f"  epoch {epoch}: {stream[8 * epoch : 8 * epoch + 8]}")
    mixed = list(eight.repeat(3).shuffle(seed=0).to_iter_dataset(read))[:8]
    print(f".repeat(3), then shuffle: the first 8: {mixed}, {len(set(mixed))} different")
# --8<-- [end:epochs]

# %% shards
# --8<-- [start:shards]
if __name__ == "__main__":
    records = [load_example(i) for i in range(2 * EXAMPLES)]  # 96 examples, 2 processes
    process_0 = grain.sharding.ShardOptions(shard_index=0, shard_count=2)  # ShardByJaxProcess
    sampler = grain.samplers.IndexSampler(
        len(records), process_0, shuffle=True, num_epochs=2, seed=0
    )
    loader = grain.DataLoader(
        data_source=records, sampler=sampler, worker_count=0, read_options=read
    )
    seen = [int(record["index"]) for record in loader]
    sliced = grain.MapDataset.range(len(records)).shuffle(seed=0).repeat()[0::2]
    print("process 0 of 2, per epoch: the lowest and highest example, and how many")
    for epoch in range(2):
        own = seen[EXAMPLES * epoch : EXAMPLES * (epoch + 1)]
        mine = [int(i) for i in sliced[EXAMPLES * epoch : EXAMPLES * (epoch + 1)]]
        print(f"  epoch {epoch}: DataLoader with ShardByJaxProcess {min(own)}-{max(own)} ({len(own)}), "
              f"shuffle then slice {min(mine)}-{max(mine)} ({len(mine)})")  # fmt: skip
    first, second = set(seen[:EXAMPLES]), set(seen[EXAMPLES:])
    print(f"  DataLoader: the same {len(first)} examples in both epochs: {first == second}")
    first = {int(i) for i in sliced[:EXAMPLES]}
    second = {int(i) for i in sliced[EXAMPLES : 2 * EXAMPLES]}
    print(f"  shuffle then slice: the same examples in both epochs: {first == second}")
# --8<-- [end:shards]
