#include "common/redaction.h"

#include <google/protobuf/descriptor.h>
#include <google/protobuf/message.h>
#include <google/protobuf/util/json_util.h>

#include <memory>

#include "csi.pb.h"

namespace blockcsi {
namespace {

using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;

bool IsSecret(const FieldDescriptor* field) { return field->options().GetExtension(csi::v1::csi_secret); }

void RedactField(Message* message, const Reflection* reflection, const FieldDescriptor* field) {
  if (field->is_map()) {
    // A map is a repeated message of {key, value}; blank the values.
    const FieldDescriptor* value_field = field->message_type()->map_value();
    int size = reflection->FieldSize(*message, field);
    for (int i = 0; i < size; ++i) {
      Message* entry = reflection->MutableRepeatedMessage(message, field, i);
      const Reflection* entry_reflection = entry->GetReflection();
      if (value_field->cpp_type() == FieldDescriptor::CPPTYPE_STRING) {
        entry_reflection->SetString(entry, value_field, kRedacted);
      } else if (value_field->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
        entry_reflection->ClearField(entry, value_field);
      }
    }
    return;
  }
  if (field->cpp_type() == FieldDescriptor::CPPTYPE_STRING) {
    if (field->is_repeated()) {
      for (int i = 0; i < reflection->FieldSize(*message, field); ++i) {
        reflection->SetRepeatedString(message, field, i, kRedacted);
      }
    } else if (reflection->HasField(*message, field) || !reflection->GetString(*message, field).empty()) {
      reflection->SetString(message, field, kRedacted);
    }
    return;
  }
  // Any other type marked secret: drop it entirely rather than guess.
  reflection->ClearField(message, field);
}

}  // namespace

void RedactSecretsInPlace(Message* message) {
  const Reflection* reflection = message->GetReflection();
  const google::protobuf::Descriptor* descriptor = message->GetDescriptor();
  for (int i = 0; i < descriptor->field_count(); ++i) {
    const FieldDescriptor* field = descriptor->field(i);
    if (IsSecret(field)) {
      RedactField(message, reflection, field);
      continue;
    }
    if (field->cpp_type() != FieldDescriptor::CPPTYPE_MESSAGE) continue;
    if (field->is_repeated()) {
      for (int j = 0; j < reflection->FieldSize(*message, field); ++j) {
        RedactSecretsInPlace(reflection->MutableRepeatedMessage(message, field, j));
      }
    } else if (reflection->HasField(*message, field)) {
      RedactSecretsInPlace(reflection->MutableMessage(message, field));
    }
  }
}

std::string RedactedJson(const Message& message) {
  std::unique_ptr<Message> copy(message.New());
  copy->CopyFrom(message);
  RedactSecretsInPlace(copy.get());
  std::string out;
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  if (!google::protobuf::util::MessageToJsonString(*copy, &out, options).ok()) {
    return "{\"unprintable\":\"" + std::string(message.GetTypeName()) + "\"}";
  }
  return out;
}

}  // namespace blockcsi
