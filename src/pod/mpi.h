/* The pod over MPI ranks: `mpirun -n R tpusim run ...` gives each rank a block of the
 * module's devices (rank r runs devices [r*N/R, (r+1)*N/R)); collectives trade operands
 * with MPI_Allgatherv and rank 0 gathers the results, so the values are bit-identical to a
 * one-process run (every device computes its collective results from the same operands in
 * the same order). Only the tpusim-mpi binary is built with MPI (TPU_HAVE_MPI, when CMake
 * finds it); everywhere else these report that, and `tpusim run` under mpirun hands itself
 * over to tpusim-mpi (tools/main.c). */
#ifndef TPU_POD_MPI_H
#define TPU_POD_MPI_H

#include "pod/pod.h"

/* Whether mpirun (or another MPI launcher) started this process with more than one rank. */
int tpu_mpi_launched(void);

/* Whether this binary has the MPI transport (is built with MPI). */
int tpu_mpi_built(void);

/* MPI_Init; *rank and *nranks of MPI_COMM_WORLD. Fails when built without MPI. */
tpu_status tpu_mpi_init(int *rank, int *nranks, tpu_diag *d);
void tpu_mpi_finalize(void);

/* A transport for a pod of ndev devices over the ranks of MPI_COMM_WORLD. */
tpu_status tpu_mpi_transport_new(int64_t ndev, tpu_pod_transport *tr, tpu_diag *d);
void tpu_mpi_transport_free(tpu_pod_transport *tr);

#endif
