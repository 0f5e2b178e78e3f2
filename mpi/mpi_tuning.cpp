#include "mpi_tuning.h"

#include <mpi.h>

#include <cstdlib>
#include <string>
#include <vector>

namespace tp::mpi {

namespace {

struct Choice {
  const char* suffix;  // the variable's name after MPIR_CVAR_
  const char* value;   // one of the names its description lists
};

// The rows of the table in the header.
constexpr Choice kChoices[] = {
    {"IREDUCE_SCATTER_BLOCK_INTRA_ALGORITHM", "sched_pairwise"},
};

bool set_in_environment(const std::string& suffix) {
  for (const char* prefix : {"MPIR_CVAR_", "MPICH_", "MPIR_PARAM_"})
    if (std::getenv((prefix + suffix).c_str()) != nullptr) return true;
  return false;
}

// MPI_T is initialised once and stays so until MPI_Finalize: MPICH 4.0.2 cannot initialise it a
// second time after MPI_T_finalize (the variables' names are gone, MPI_T_cvar_get_num crashes),
// which would break any later user of the tool interface in this process (a profiler, a test).
bool tool_interface() {
  static const bool ok = [] {
    int provided = 0;
    return MPI_T_init_thread(MPI_THREAD_SINGLE, &provided) == MPI_SUCCESS;
  }();
  return ok;
}

// Writes `value` into the int variable `name` if it is at its default (0); true when written.
bool write_choice(const std::string& name, const char* value) {
  AlgorithmVariable v;
  if (!read_algorithm_variable(name, v) || v.value != 0) return false;
  const int wanted = algorithm_value(v.description, value);
  if (wanted <= 0) return false;
  MPI_T_cvar_handle handle;
  int count = 0;
  if (MPI_T_cvar_handle_alloc(v.index, nullptr, &handle, &count) != MPI_SUCCESS) return false;
  const bool ok = count == 1 && MPI_T_cvar_write(handle, &wanted) == MPI_SUCCESS;
  MPI_T_cvar_handle_free(&handle);
  return ok;
}

std::string apply() {
  std::string done;
  for (const Choice& c : kChoices) {
    if (set_in_environment(c.suffix)) continue;
    const std::string name = std::string("MPIR_CVAR_") + c.suffix;
    if (write_choice(name, c.value)) done += (done.empty() ? "" : " ") + name + "=" + c.value;
  }
  return done;
}

}  // namespace

// Each choice is "<name><spaces> - <what it does>", one after the other (MPI_T gives them without
// line breaks): the text before the k-th " - " ends with the k-th name.
int algorithm_value(const std::string& description, const std::string& name) {
  int index = 0;
  for (size_t dash = description.find(" - "); dash != std::string::npos;
       dash = description.find(" - ", dash + 3), ++index) {
    size_t end = dash;
    while (end > 0 && description[end - 1] == ' ') --end;
    if (end >= name.size() && description.compare(end - name.size(), name.size(), name) == 0)
      return index;
  }
  return -1;
}

bool read_algorithm_variable(const std::string& name, AlgorithmVariable& out) {
  int index = -1;
  if (!tool_interface() || MPI_T_cvar_get_index(name.c_str(), &index) != MPI_SUCCESS) return false;
  char var[256], description[4096];
  int var_len = sizeof var, description_len = sizeof description, verbosity = 0, bind = 0,
      scope = 0;
  MPI_Datatype type = MPI_DATATYPE_NULL;
  MPI_T_enum enumtype = MPI_T_ENUM_NULL;
  if (MPI_T_cvar_get_info(index, var, &var_len, &verbosity, &type, &enumtype, description,
                          &description_len, &bind, &scope) != MPI_SUCCESS ||
      type != MPI_INT || bind != MPI_T_BIND_NO_OBJECT)
    return false;
  MPI_T_cvar_handle handle;
  int count = 0, value = -1;
  if (MPI_T_cvar_handle_alloc(index, nullptr, &handle, &count) != MPI_SUCCESS) return false;
  const bool ok = count == 1 && MPI_T_cvar_read(handle, &value) == MPI_SUCCESS;
  MPI_T_cvar_handle_free(&handle);
  if (!ok) return false;
  out.index = index;
  out.value = value;
  out.description = description;
  return true;
}

const std::string& tune_collectives() {
  static const std::string done = apply();
  return done;
}

}  // namespace tp::mpi
