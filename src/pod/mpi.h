/* The pod over MPI ranks: `mpirun -n R tpusim run ...` gives each rank a block of the
 * module's devices (rank r runs devices [r*N/R, (r+1)*N/R)); collectives trade operands
 * with MPI_Allgatherv and rank 0 gathers the results, so the values are bit-identical to a
 * one-process run (every device computes its collective results from the same operands in
 * the same order). Built when CMake finds MPI (TPU_HAVE_MPI); otherwise these report that. */
#ifndef TPU_POD_MPI_H
#define TPU_POD_MPI_H

#include "pod/pod.h"

/* Whether mpirun (or another MPI launcher) started this process with more than one rank. */
int tpu_mpi_launched(void);

/* MPI_Init; *rank and *nranks of MPI_COMM_WORLD. Fails when built without MPI. */
tpu_status tpu_mpi_init(int *rank, int *nranks, tpu_diag *d);
void tpu_mpi_finalize(void);

/* A transport for a pod of ndev devices over the ranks of MPI_COMM_WORLD. */
tpu_status tpu_mpi_transport_new(int64_t ndev, tpu_pod_transport *tr, tpu_diag *d);
void tpu_mpi_transport_free(tpu_pod_transport *tr);

#endif
