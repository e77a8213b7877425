"""ut.cpu.workers: how a sweep's worker processes share the CPUs and the runs."""

import os

from absl.testing import absltest

from tests import sweep_config
from ut.cpu import workers
from ut.experiments import sweep


class SweepTest(absltest.TestCase):

  def test_worker_cpus_split_the_cpus(self):
    cpus = {0, 1, 2, 3, 4}
    shares = [workers.worker_cpus(i, 2, cpus) for i in range(2)]
    self.assertEqual(shares, [{0, 1, 2}, {3, 4}])
    self.assertEqual(
        [workers.worker_cpus(i, 3, {0, 1}) for i in range(3)], [{0}, {1}, {0}]
    )  # More workers than CPUs: round robin.
    self.assertLessEqual(workers.worker_cpus(0, 1), os.sched_getaffinity(0))

  def test_workers_split_memory_bound_and_other_runs(self):
    units = [[run] for run in sweep.collect_runs(sweep_config, "kinds")]
    kinds = lambda order: [u[0][1].model.kind for u in order]
    size = lambda order: [sweep.run_cost(u[0][1]) for u in order]
    order = lambda index, count: workers.worker_order(
        units,
        index,
        count,
        cost=lambda u: sweep.run_cost(u[0][1]),
        memory_bound=lambda u: workers.memory_bound(u[0][1].model.kind),
    )
    alone = order(0, 1)
    self.assertEqual(size(alone), sorted(size(units), reverse=True))
    even, odd = order(2, 4), order(1, 4)
    num_sparse = kinds(units).count("sparse")
    self.assertGreater(num_sparse, 0)
    self.assertLess(num_sparse, len(units))
    self.assertEqual(kinds(even)[:num_sparse], ["sparse"] * num_sparse)
    self.assertNotIn("sparse", kinds(odd)[: len(units) - num_sparse])
    for order, split in ((even, num_sparse), (odd, len(units) - num_sparse)):
      # Every unit once, largest first within each class.
      self.assertCountEqual([u[0][0] for u in order], [u[0][0] for u in units])
      for part in (order[:split], order[split:]):
        self.assertEqual(size(part), sorted(size(part), reverse=True))


if __name__ == "__main__":
  absltest.main()
