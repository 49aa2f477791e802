package controllerutil

// Workers is every operator's MaxConcurrentReconciles: how many of its objects are reconciled at once.
// controller-runtime never reconciles one object twice at once, and what two objects of an operator
// share goes through the API server under resourceVersion preconditions or through mutex-guarded
// memory, so objects need no order among themselves. With controller-runtime's default of one worker,
// objects changing together waited behind each other (TestBench*Scale, docs/performance.md): at 1,000
// StatefulSetLocks, one failover's p99 was 9.8 s behind the Leases' renewals, 3.6 s with four workers.
// More than four would mostly queue in the API server of a small cluster (100 PhasedRollouts at once
// keep four busy on 2 cores); a larger one can take more, and priority and fairness protects it.
const Workers = 4
